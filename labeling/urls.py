from django.contrib.auth import views as auth_views
from django.urls import path

from labeling.web import views
from labeling.web.auth import ThrottledLoginView

# The task screen's requests first, most frequent first (annotate.urls says why).
urlpatterns = [
    path("assignments/<int:pk>/presses/", views.presses, name="presses"),
    path("assignments/<int:pk>/submit/", views.submit, name="submit"),
    path("assignments/<int:pk>/", views.task, name="task"),
    path("assignments/<int:pk>/steps/<int:step>/<int:completion>/", views.rate, name="rate"),
    path("next/", views.next_task, name="next-task"),
    path("", views.home, name="home"),
    path("guide/", views.guide, name="guide"),
    path("login/", ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("assignments/<int:pk>/give-up/", views.give_up, name="give-up"),
    path("assignments/<int:pk>/bad-problem/", views.bad_problem, name="bad-problem"),
    path("screening/", views.screening_result, name="screening-result"),
]

# Phase 1 (labeling.web.phase_one_views): the task page itself is "task" above.
from labeling.web import phase_one_views  # noqa: E402

urlpatterns += [
    path(
        "assignments/<int:pk>/phase-one/<int:step>/<int:completion>/",
        phase_one_views.rate_candidate,
        name="phase-one-rate",
    ),
    path(
        "assignments/<int:pk>/phase-one/<int:step>/continue/", phase_one_views.continue_step, name="phase-one-continue"
    ),
    path("assignments/<int:pk>/phase-one/<int:step>/retry/", phase_one_views.retry_candidates, name="phase-one-retry"),
]
