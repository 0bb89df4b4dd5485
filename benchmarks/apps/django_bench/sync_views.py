"""The project shape of a typical Django site, as sync views (what most projects have): a
paginated list with nested rows, a nodeinfo document built from COUNT queries, and a small
static JSON document.  Under ASGI each one runs through asgiref's sync_to_async."""

from django.core.paginator import Paginator
from django.http import JsonResponse

from .models import Item, Tag
from .views import INSTANCE

PAGE_SIZE = 20


def items(request):
    """GET /sync/api/items?page=N: PAGE_SIZE items, each with its tags inline."""
    queryset = Item.objects.prefetch_related("tags").order_by("id")
    page = Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page", 1))
    rows = [
        {
            "id": item.id,
            "name": item.name,
            "price": item.price,
            "tags": [{"id": tag.id, "label": tag.label} for tag in item.tags.all()],
        }
        for item in page
    ]
    return JsonResponse(
        {
            "page": page.number,
            "pages": page.paginator.num_pages,
            "count": page.paginator.count,
            "items": rows,
        }
    )


def nodeinfo(request):
    """GET /sync/.well-known/nodeinfo: usage figures from three COUNT queries."""
    return JsonResponse(
        {
            "version": "2.0",
            "software": {"name": "pyserver-bench", "version": "1.0"},
            "usage": {
                "items": Item.objects.count(),
                "active_items": Item.objects.filter(active=True).count(),
                "tags": Tag.objects.count(),
            },
            "openRegistrations": False,
        }
    )


def instance(request):
    """GET /sync/api/instance: a small static document."""
    return JsonResponse(INSTANCE)
