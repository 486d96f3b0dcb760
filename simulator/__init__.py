"""The simulated fleet: labelled scenarios written through the real writer."""
