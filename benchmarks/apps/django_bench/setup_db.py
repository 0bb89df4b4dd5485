"""Create the benchmark database: migrate, then 50 rows with 3 tags each.  Run once before
the runs.

DJANGO_BENCH_DB=/tmp/x.sqlite3 python -m benchmarks.apps.django_bench.setup_db
"""

import os

ROWS = 50
TAGS_PER_ROW = 3


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.apps.django_bench.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from .models import Item, Tag

    call_command("migrate", verbosity=0, interactive=False)
    Item.objects.all().delete()
    Item.objects.bulk_create(
        Item(name=f"item {i}", description=f"the benchmark row number {i}", price=100 + i)
        for i in range(1, ROWS + 1)
    )
    Tag.objects.bulk_create(
        Tag(item=item, label=f"tag {item.id}.{k}")
        for item in Item.objects.all()
        for k in range(TAGS_PER_ROW)
    )
    db = django.conf.settings.DATABASES["default"]
    where = f"PostgreSQL {db['HOST']}:{db['PORT']}" if "HOST" in db else db["NAME"]
    print(f"{Item.objects.count()} rows in {where}")


if __name__ == "__main__":
    main()
