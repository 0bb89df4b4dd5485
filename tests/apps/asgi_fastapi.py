"""A FastAPI application: pydantic validation, path/query params, a dependency, UploadFile,
StreamingResponse, and a lifespan that yields state."""

import asyncio
import contextlib
import hashlib
from typing import Annotated

from fastapi import Depends, FastAPI, File, Header, HTTPException, Request, UploadFile
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field


class Item(BaseModel):
    name: str = Field(min_length=1)
    price: float = Field(gt=0)
    tags: list[str] = []


@contextlib.asynccontextmanager
async def lifespan(app):
    yield {"started": "yes"}


app = FastAPI(lifespan=lifespan)


async def current_user(x_user: Annotated[str | None, Header()] = None):
    if x_user is None:
        raise HTTPException(status_code=401, detail="no user")
    return {"name": x_user}


@app.post("/items")
async def create_item(item: Item):
    return {"item": item.model_dump(), "total": round(item.price * 1.2, 2)}


@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None, limit: int = 10):
    return {"item_id": item_id, "q": q, "limit": limit}


@app.get("/me")
async def me(user: Annotated[dict, Depends(current_user)]):
    return user


@app.get("/sync")
def sync_endpoint(n: int = 1):
    """A sync endpoint: FastAPI runs it in a thread pool off the loop."""
    return {"square": n * n}


@app.post("/upload")
async def upload(file: Annotated[UploadFile, File()]):
    digest, size = hashlib.sha256(), 0
    while chunk := await file.read(1 << 20):
        digest.update(chunk)
        size += len(chunk)
    return {"filename": file.filename, "size": size, "sha256": digest.hexdigest()}


@app.get("/stream")
async def stream(n: int = 5):
    async def lines():
        for index in range(n):
            yield f"row {index}\n".encode()
            await asyncio.sleep(0.01)

    return StreamingResponse(lines(), media_type="text/plain")


@app.get("/state")
async def state(request: Request):
    return {"started": request.state.started}
