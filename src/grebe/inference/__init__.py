"""grebe.inference"""
