"""The staff dashboard: campaign plots and export jobs with live status cards.

htmx requests get the ``export-card`` fragment of ``dashboard/index.html``; a
card polls every 2 s while its job is queued or running and renders without
the poll attribute once it is finished, which stops the polling.
"""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from labeling.data.exportjobs import export_filters_from_dict, export_job_create, export_job_percent
from labeling.data.stepwise import Neutral, parquet_available
from labeling.models import ExportFormat, ExportJob
from labeling.staff import charts as dashboard_charts
from labeling.staff import dashboard as reads
from labeling.staff.panels import dashboard_panels


def _card_context(job: ExportJob) -> dict[str, object]:
    return {"job": job, "percent": export_job_percent(job)}


@staff_member_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    per_day = reads.labels_per_day(days=30)
    per_generation = reads.labels_per_generation()
    shares = reads.rating_shares()
    correctness = reads.correct_answer_shares()
    queue = reads.queue_depth()
    jobs = reads.export_jobs_recent()
    agreement = reads.qc_agreement_by_generation()
    charts = {
        "per_day": dashboard_charts.bar_chart(
            [(d.strftime("%m-%d"), n) for d, n in per_day], label="step labels per day", every=5
        ),
        "per_generation": dashboard_charts.bar_chart(per_generation, label="step labels per generation"),
        "ratings": dashboard_charts.share_bars(
            [("all labels", [("+1", shares.positive), ("0", shares.neutral), ("-1", shares.negative)])],
            label="share of ratings",
            colours=dashboard_charts.RATING_COLOURS,
        ),
        "correct": dashboard_charts.share_bars(
            [
                (
                    r.label,
                    [
                        ("correct", r.correct),
                        ("wrong", r.incorrect),
                        ("no answer", r.no_answer),
                        ("ungraded", r.ungraded),
                    ],
                )
                for r in correctness
            ],
            label="solutions ending in a correct answer, per generation",
            colours=dashboard_charts.ANSWER_COLOURS,
        ),
        "queue": dashboard_charts.bar_chart([(g, n) for g, _s, n in queue], label="open tasks per generation"),
        "agreement": dashboard_charts.line_chart(
            agreement.generations,
            {"all labelers": [None if r is None else 100 * r for r in agreement.overall]},
            label="agreement with gold per generation (%)",
            top=100,
        ),
    }
    context = {
        "charts": charts,
        "shares": shares,
        "queue": queue,
        "panels": [panel.render(request) for panel in dashboard_panels()],
        "generations": reads.generations_recent(),
        "agreement": agreement,
        "cards": [_card_context(job) for job in jobs],
        "formats": [f for f in ExportFormat if f != ExportFormat.PARQUET or parquet_available()],
        "neutral_choices": [n.value for n in Neutral],
    }
    return render(request, "dashboard/index.html", context)


@staff_member_required
@require_GET
def export_job_card(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(ExportJob, pk=pk)
    return render(request, "dashboard/index.html#export-card", _card_context(job))


@staff_member_required
@require_POST
def export_job_start(request: HttpRequest) -> HttpResponse:
    raw_format = request.POST.get("format", ExportFormat.PRM800K)
    raw_neutral = request.POST.get("neutral", Neutral.POSITIVE.value)
    if raw_format not in ExportFormat.values or raw_neutral not in {n.value for n in Neutral}:
        return HttpResponse("Unknown export format or neutral mapping.", status=400)
    if raw_format == ExportFormat.PARQUET and not parquet_available():
        return HttpResponse("Parquet needs pyarrow, which is not installed.", status=400)
    filters = export_filters_from_dict(
        {
            "exclude_quality_control": request.POST.get("exclude_quality_control") == "on",
            "exclude_screening": request.POST.get("exclude_screening") == "on",
            "finished_only": request.POST.get("finished_only") == "on",
        }
    )
    job = export_job_create(
        export_format=ExportFormat(raw_format),
        filters=filters,
        neutral=Neutral(raw_neutral),
        requested_by=request.user if isinstance(request.user, User) else None,
    )
    if getattr(request, "htmx", False):
        return render(request, "dashboard/index.html#export-card", _card_context(job))
    return redirect("dashboard")
