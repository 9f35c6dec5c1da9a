"""The copy-as-decode web app (Gradio): `python -m app` serves it on 127.0.0.1.

service.py owns models, the engine, storage and limits; handlers.py translates widget values;
ui.py lays out the Blocks; charts.py draws plotly figures from plain numbers.
"""
