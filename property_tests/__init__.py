"""property_tests"""
