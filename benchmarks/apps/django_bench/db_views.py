"""Issue 11: a sync JSON view the way a Django site on PostgreSQL has them: three queries and
a call to an upstream service, here a 20 ms time.sleep (the thread waits; the GIL is free)."""

import time

from django.db.models import Count, Sum
from django.http import JsonResponse

from .models import Item, Tag

UPSTREAM_WAIT_S = 0.020


def dashboard(request):
    """GET /db/dashboard: ten items, their tag count, the totals; after the upstream wait."""
    rows = list(Item.objects.filter(active=True).order_by("id").values("id", "name", "price")[:10])
    tags = Tag.objects.filter(item_id__in=[r["id"] for r in rows]).count()
    totals = Item.objects.aggregate(items=Count("id"), value=Sum("price"))
    time.sleep(UPSTREAM_WAIT_S)  # the upstream call
    return JsonResponse({"items": rows, "tags": tags, "totals": totals})
