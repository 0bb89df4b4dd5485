"""A minimal Django project (no database) served as apps.djangoproj.wsgi:application."""
