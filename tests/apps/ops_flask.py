"""A Flask app whose logger writes through Flask's default handler, to wsgi.errors."""

import logging

from flask import Flask

app = Flask(__name__)
app.logger.setLevel(logging.INFO)


@app.route("/log")
def log():
    app.logger.info("flask-info-line")
    return "logged"
