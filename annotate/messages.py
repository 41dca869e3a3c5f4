"""Django's message middleware, with the message storage built only for a request that uses it.

Django builds the storage (a cookie store and a session store behind it) for
every request and asks it to save itself after every response. Most requests
here never touch messages (a key press answers JSON, as does the REST API),
and for them both steps cost about a tenth of the whole middleware stack. A
storage nobody built has nothing to save: Django's ``update`` stores only
messages that were read or added.
"""

from __future__ import annotations

from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.messages.storage import default_storage
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty


class LazyMessageMiddleware(MessageMiddleware):
    def process_request(self, request: HttpRequest) -> None:
        request._messages = SimpleLazyObject(lambda: default_storage(request))  # type: ignore[attr-defined]

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        storage = getattr(request, "_messages", None)
        if isinstance(storage, SimpleLazyObject) and storage._wrapped is empty:  # type: ignore[attr-defined]
            return response
        return super().process_response(request, response)
