"""grebe.flows"""
