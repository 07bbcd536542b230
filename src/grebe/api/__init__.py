"""grebe.api"""
