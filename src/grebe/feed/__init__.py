"""grebe.feed"""
