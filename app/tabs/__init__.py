"""One module per tab: each builds its widgets and keeps their callbacks next to them.

Callbacks return (or yield) dicts keyed by the components themselves, which Gradio applies to
the event's outputs and leaves the rest unchanged: no string keys to keep in step with a layout.
"""
