"""Settings for the test project: production-like (DEBUG off), no database, no templates."""

SECRET_KEY = "pyserver-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "apps.djangoproj.urls"
INSTALLED_APPS = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
DATABASES = {}
TEMPLATES = []
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
