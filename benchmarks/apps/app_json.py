"""The application scenarios (fastapi-json, starlette-json, flask-json): one JSON view
each, written as its framework's users write them, answering GET /items/42 with the
same document."""

ITEM_PATH = "/items/42"


def item(item_id, limit):
    """The document every framework returns for ITEM_PATH."""
    return {"id": item_id, "name": "widget", "tags": ["new", "sale"], "price": 9.5, "limit": limit}
