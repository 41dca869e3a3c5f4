from django.urls import include, path
from rest_framework.routers import DefaultRouter

from labeling.api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
# No "/api/problems.json"-style twins: the views take no format argument (they
# answered 500), and JSON is the only representation.
router.include_format_suffixes = False
router.register("problems", views.ProblemViewSet, basename="api-problem")
router.register("solutions", views.SolutionViewSet, basename="api-solution")
router.register("generations", views.GenerationViewSet, basename="api-generation")
router.register("exports", views.ExportJobViewSet, basename="api-export")

urlpatterns = [
    path("tasks/next/", views.NextTaskView.as_view(), name="api-task-next"),
    path("assignments/<int:pk>/", views.AssignmentView.as_view(), name="api-assignment"),
    path("assignments/<int:pk>/ratings/", views.RatingView.as_view(), name="api-assignment-ratings"),
    path("assignments/<int:pk>/submit/", views.SubmitView.as_view(), name="api-assignment-submit"),
    path("assignments/<int:pk>/give-up/", views.GiveUpView.as_view(), name="api-assignment-give-up"),
    path("assignments/<int:pk>/bad-problem/", views.BadProblemView.as_view(), name="api-assignment-bad-problem"),
    path("", include(router.urls)),
]
