"""flask-json: a Flask view returning a dict (Flask serialises it as JSON)."""

from flask import Flask

from benchmarks.apps.app_json import item

app = Flask(__name__)


@app.get("/items/<int:item_id>")
def read_item(item_id):
    return item(item_id, 10)
