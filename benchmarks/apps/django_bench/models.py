from django.db import models


class Item(models.Model):
    name = models.CharField(max_length=100)
    description = models.TextField()
    price = models.IntegerField()
    active = models.BooleanField(default=True)

    class Meta:
        app_label = "bench"
        ordering = ["id"]
