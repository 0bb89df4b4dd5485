from django.urls import path

from . import views

urlpatterns = [
    path("async/", views.async_view),
    path("sync/", views.sync_view),
    path("form/", views.form_view),
    path("stream/", views.stream_view),
    path("cancel/", views.cancel_view),
    path("boom/", views.boom_view),
]
