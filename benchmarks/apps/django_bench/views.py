"""Three JSON views: the 50-row list (async ORM), a nodeinfo document, instance info."""

from django.http import JsonResponse

from .models import Item

NODEINFO = {
    "links": [
        {
            "rel": "http://nodeinfo.diaspora.software/ns/schema/2.0",
            "href": "https://bench.example/nodeinfo/2.0",
        }
    ]
}

INSTANCE = {
    "uri": "bench.example",
    "title": "pyserver benchmark",
    "version": "1.0",
    "registrations": False,
    "stats": {"user_count": 1, "status_count": 50, "domain_count": 1},
}


async def items(request):
    rows = [row async for row in Item.objects.values()]
    return JsonResponse({"count": len(rows), "items": rows})


async def nodeinfo(request):
    return JsonResponse(NODEINFO)


async def instance(request):
    return JsonResponse(INSTANCE)
