"""grebe.media"""
