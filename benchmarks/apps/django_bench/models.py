from django.db import models


class Item(models.Model):
    name = models.CharField(max_length=100)
    description = models.TextField()
    price = models.IntegerField()
    active = models.BooleanField(default=True)

    class Meta:
        app_label = "bench"
        ordering = ["id"]


class Tag(models.Model):
    """Nested rows of an item (the paginated list of the sync views shows them inline)."""

    item = models.ForeignKey(Item, related_name="tags", on_delete=models.CASCADE)
    label = models.CharField(max_length=50)

    class Meta:
        app_label = "bench"
        ordering = ["id"]
