from django.urls import path

from . import views

urlpatterns = [
    path("api/items", views.items),
    path(".well-known/nodeinfo", views.nodeinfo),
    path("api/instance", views.instance),
]
