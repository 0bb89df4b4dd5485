"""A small Bottle application: apps.bottle_app:application (validated) or apps.bottle_app:app.

Static files are served from $BOTTLE_STATIC_ROOT (set by the test) with bottle.static_file,
which hands the open file to environ['wsgi.file_wrapper'].
"""

import os
from wsgiref.validate import validator

import bottle

app = bottle.Bottle()


@app.get("/hello/<name>")
def hello(name):
    return f"hello {name}"


@app.get("/json")
def as_json():
    return {"framework": "bottle", "query": dict(bottle.request.query)}


@app.post("/form")
def form():
    return {"fields": dict(bottle.request.forms)}


@app.get("/static/<filename:path>")
def static(filename):
    return bottle.static_file(filename, root=os.environ["BOTTLE_STATIC_ROOT"])


application = validator(app)
