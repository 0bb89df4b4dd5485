"""starlette-json: a Starlette route returning a JSONResponse."""

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from benchmarks.apps.app_json import item


async def read_item(request):
    return JSONResponse(item(int(request.path_params["item_id"]), 10))


app = Starlette(routes=[Route("/items/{item_id}", read_item)])
