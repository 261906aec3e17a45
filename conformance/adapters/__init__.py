"""conformance/adapters"""
