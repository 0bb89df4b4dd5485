"""fastapi-json: an `async def` view with a path parameter, a dependency and a pydantic
response model (the shape of a typical FastAPI endpoint)."""

from fastapi import Depends, FastAPI
from pydantic import BaseModel

from benchmarks.apps.app_json import item


class Item(BaseModel):
    id: int
    name: str
    tags: list[str]
    price: float
    limit: int


async def page_limit(limit: int = 10) -> int:
    return limit


app = FastAPI()


@app.get("/items/{item_id}", response_model=Item)
async def read_item(item_id: int, limit: int = Depends(page_limit)):
    return item(item_id, limit)
