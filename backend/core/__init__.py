"""The deterministic half of copy-as-decode. Imports only the standard library (a test proves it)."""
