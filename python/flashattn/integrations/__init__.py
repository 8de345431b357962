"""Integrations of flashattn with other libraries (transformers)."""
