from django.urls import path

from . import db_views, sync_views, views

urlpatterns = [
    path("api/items", views.items),
    path(".well-known/nodeinfo", views.nodeinfo),
    path("api/instance", views.instance),
    path("sync/api/items", sync_views.items),
    path("sync/.well-known/nodeinfo", sync_views.nodeinfo),
    path("sync/api/instance", sync_views.instance),
    path("db/dashboard", db_views.dashboard),
]
