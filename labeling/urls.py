from django.contrib.auth import views as auth_views
from django.urls import path

from labeling import views

urlpatterns = [
    path("", views.home, name="home"),
    path("guide/", views.guide, name="guide"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("next/", views.next_task, name="next-task"),
    path("assignments/<int:pk>/", views.task, name="task"),
    path("assignments/<int:pk>/steps/<int:step>/<int:completion>/", views.rate, name="rate"),
    path("assignments/<int:pk>/submit/", views.submit, name="submit"),
    path("assignments/<int:pk>/give-up/", views.give_up, name="give-up"),
    path("assignments/<int:pk>/bad-problem/", views.bad_problem, name="bad-problem"),
    path("screening/", views.screening_result, name="screening-result"),
]
