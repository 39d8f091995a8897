"""The machine files (*.yaml), installed as the package perfmlp.machines:
pyproject.toml maps this folder there, and perfmlp.model.machine reads them
through importlib.resources."""
