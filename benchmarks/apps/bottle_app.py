"""bottle-ab: a Bottle application answering /hello with "Hello World!"."""

import bottle

app = bottle.Bottle()


@app.route("/hello")
def hello():
    return "Hello World!"
