"""perfmlp: a data-parallel MLP trainer with exact counters, an analytic
performance model and a roofline report."""

__version__ = "0.5.0.dev0"
