from django.urls import path

from . import views

urlpatterns = [
    path("json/", views.json_view),
    path("form/", views.form_view),
    path("stream/", views.stream_view),
    path("boom/", views.boom_view),
]
