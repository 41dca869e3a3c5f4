# mypy: allow-subclassing-any, allow-untyped-decorators, allow-untyped-calls
# (djangorestframework ships no type information; see pyproject [tool.mypy] overrides)
"""Shapes of the API's requests and responses. Serializers validate and render; services write."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from labeling.data.exportjobs import export_job_percent
from labeling.data.stepwise import Neutral
from labeling.models import ExportFormat, ExportJob, Generation, Phase, Problem, Solution
from labeling.work.assignment import MAX_VERSION
from labeling.work.selectors import TaskScreen

# One request imports at most this many items; larger sets go through the
# import_problems / import_solutions commands, which stream from files.
MAX_IMPORT_ITEMS = 5000


class ProblemSerializer(serializers.ModelSerializer):
    class Meta:
        model = Problem
        fields = ["id", "unique_id", "problem", "solution", "answer", "subject", "level", "split", "created_at"]


class SolutionSerializer(serializers.ModelSerializer):
    problem_unique_id = serializers.CharField(source="problem.unique_id", read_only=True)

    class Meta:
        model = Solution
        fields = [
            "id",
            "problem",
            "problem_unique_id",
            "steps",
            "final_answer",
            "source_model",
            "generator",
            "source_key",
            "is_correct",
            "grading_note",
            "created_at",
        ]


class GenerationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Generation
        fields = ["id", "number", "phase", "status", "config", "error", "created_at", "started_at", "finished_at"]


class BulkImportSerializer(serializers.Serializer):
    items = serializers.ListField(child=serializers.JSONField(), max_length=MAX_IMPORT_ITEMS, allow_empty=False)
    dry_run = serializers.BooleanField(default=False)


class ImportErrorItemSerializer(serializers.Serializer):
    index = serializers.IntegerField(
        allow_null=True, help_text="position of the item in `items` (0-based); null when the body itself is malformed"
    )
    field = serializers.CharField()
    message = serializers.CharField()


class ImportErrorSerializer(serializers.Serializer):
    errors = ImportErrorItemSerializer(many=True)


class ImportResultSerializer(serializers.Serializer):
    read = serializers.IntegerField()
    created = serializers.DictField(child=serializers.IntegerField())
    skipped = serializers.IntegerField(help_text="already in the database")
    duplicates = serializers.IntegerField(help_text="repeated within the request's items; written once")
    dry_run = serializers.BooleanField()
    summary = serializers.CharField()


class ExportFiltersSerializer(serializers.Serializer):
    phase = serializers.ChoiceField(choices=Phase.choices, required=False, allow_null=True, default=None)
    generations = serializers.ListField(child=serializers.IntegerField(), required=False, default=list)
    exclude_quality_control = serializers.BooleanField(default=False)
    exclude_screening = serializers.BooleanField(default=False)
    finished_only = serializers.BooleanField(default=False)
    include_excluded_labelers = serializers.BooleanField(default=False)


class ExportRequestSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=ExportFormat.choices, default=ExportFormat.PRM800K)
    neutral = serializers.ChoiceField(
        choices=[(n.value, n.value) for n in Neutral],
        default=Neutral.POSITIVE.value,
        help_text="stepwise formats: the label of a step rated 0",
    )
    filters = ExportFiltersSerializer(required=False)


class ExportJobSerializer(serializers.ModelSerializer):
    percent = serializers.SerializerMethodField()
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = ExportJob
        fields = [
            "id",
            "status",
            "format",
            "filters",
            "records",
            "sha256",
            "progress",
            "total",
            "percent",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "download_url",
        ]

    def get_percent(self, job: ExportJob) -> int | None:
        return export_job_percent(job)

    def get_download_url(self, job: ExportJob) -> str | None:
        if job.status != "done":
            return None
        request = self.context.get("request")
        path = f"/api/exports/{job.pk}/download/"
        return request.build_absolute_uri(path) if request is not None else path


class RatingRequestSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0)
    completion = serializers.IntegerField(min_value=0, default=0)
    rating = serializers.ChoiceField(choices=[(-1, "-1"), (0, "0"), (1, "+1")], allow_null=True)
    flagged = serializers.BooleanField(default=False)
    version = serializers.IntegerField(min_value=1, max_value=MAX_VERSION)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, allow_blank=False, trim_whitespace=True)


class CompletionSerializer(serializers.Serializer):
    completion = serializers.IntegerField()
    text = serializers.CharField()
    rating = serializers.IntegerField(allow_null=True)
    flagged = serializers.BooleanField()


class StepSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    completions = CompletionSerializer(many=True)
    is_error = serializers.BooleanField()


class AssignmentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    finish_reason = serializers.CharField(allow_null=True)
    problem = serializers.CharField()
    step_count = serializers.IntegerField()
    steps = StepSerializer(many=True, help_text="revealed steps; completion 0 is the solution's own step")
    version = serializers.IntegerField(help_text="send a larger version with the next rating")
    ready_to_submit = serializers.BooleanField()


def assignment_payload(screen: TaskScreen) -> dict[str, Any]:
    return {
        "id": screen.assignment.pk,
        "status": screen.assignment.status,
        "finish_reason": screen.assignment.finish_reason,
        "problem": screen.problem.problem,
        "step_count": screen.step_count,
        "steps": [
            {
                "step": row.index,
                "completions": [
                    {"completion": c.completion_index, "text": c.text, "rating": c.rating, "flagged": c.flagged}
                    for c in [row.own, *row.alternatives]
                ],
                "is_error": row.is_error,
            }
            for row in screen.rows
        ],
        "version": screen.version,
        "ready_to_submit": screen.ready_reason is not None,
    }


class RatingResultSerializer(serializers.Serializer):
    applied = serializers.BooleanField(help_text="false: the request was older than the stored rating, or a repeat")
    assignment = AssignmentSerializer()


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()
