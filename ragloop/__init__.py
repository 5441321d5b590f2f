"""ragloop: answers questions from a document collection, checks them, and improves itself."""

__version__ = "0.1.0"
