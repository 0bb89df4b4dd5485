"""A small Flask application: apps.flask_app:application (validated) or apps.flask_app:app.

When the server sets `wsgi.input_terminated`, Werkzeug reads wsgi.input with read() and no
size, which wsgiref's validator forbids; so the validated `application` hides that key from
Flask (Werkzeug then reads CONTENT_LENGTH bytes with sized reads). The bare `app` sees the
server's environ unchanged.
"""

import hashlib
from wsgiref.validate import validator

from flask import Flask, abort, jsonify, redirect, request, url_for

app = Flask(__name__)


@app.get("/")
def index():
    return "hello from flask"


@app.get("/users/<int:user_id>")
def user(user_id):
    return jsonify(id=user_id, name=f"user-{user_id}")


@app.post("/json")
def echo_json():
    payload = request.get_json()
    return jsonify(received=payload, content_type=request.content_type)


@app.post("/form")
def form():
    return jsonify(fields=request.form.to_dict())


@app.post("/upload")
def upload():
    stored = request.files["file"]
    data = stored.read()
    return jsonify(
        filename=stored.filename,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        note=request.form.get("note"),
    )


@app.get("/redirect")
def go_home():
    return redirect(url_for("index"))


@app.get("/missing")
def missing():
    abort(404)


def _without_input_terminated(environ, start_response):
    environ.pop("wsgi.input_terminated", None)
    return app(environ, start_response)


application = validator(_without_input_terminated)
