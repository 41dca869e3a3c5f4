import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
application = get_wsgi_application()

# Each gunicorn worker imports this module once, after it forks: load what its
# first request would otherwise load (annotate.warmup).
from annotate.warmup import warm  # noqa: E402  (needs the settings and the apps set up above)

warm()
