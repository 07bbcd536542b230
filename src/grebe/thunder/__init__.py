"""grebe.thunder"""
