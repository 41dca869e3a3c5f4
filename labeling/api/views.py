# mypy: allow-subclassing-any, allow-untyped-decorators, allow-untyped-calls
# (djangorestframework ships no type information; see pyproject [tool.mypy] overrides)
"""The REST API. Each view: authorise and fetch (scoped to the caller), validate, one service call, render.

Research staff read problems, solutions and generations, bulk-import problems
and solution pools (the same validation as the import commands), and start
exports that a worker runs. Labelers work through their own tasks; another
labeler's assignment is indistinguishable from a missing one (404).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import FileResponse, Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from labeling.api.permissions import IsLabeler, IsStaff
from labeling.api.serializers import (
    AssignmentSerializer,
    BulkImportSerializer,
    DetailSerializer,
    ExportJobSerializer,
    ExportRequestSerializer,
    GenerationSerializer,
    ImportErrorSerializer,
    ImportResultSerializer,
    ProblemSerializer,
    RatingRequestSerializer,
    RatingResultSerializer,
    ReasonSerializer,
    SolutionSerializer,
    assignment_payload,
)
from labeling.data.exportjobs import export_filters_from_dict, export_job_create, export_job_file
from labeling.data.imports import ImportResult, problems_import_items, solutions_import_items
from labeling.data.prm800k import RecordError
from labeling.data.stepwise import Neutral, parquet_available
from labeling.labelers import labeler_for_user
from labeling.models import Assignment, ExportFormat, ExportJob, FinishReason, Generation, Labeler, Problem, Solution
from labeling.work.assignment import (
    AssignmentClosed,
    AssignmentNotFound,
    NotFinished,
    RatingRejected,
    assignment_abandon,
    assignment_for_labeler,
)
from labeling.work.queue import LabelerMayNotWork, assignment_next
from labeling.work.rating import assignment_submit, step_rate
from labeling.work.selectors import task_screen


class IdCursorPagination(CursorPagination):
    # Cursor pagination never counts the table: lists stay fast at release scale.
    ordering = "-id"
    page_size = 100
    max_page_size = 1000
    page_size_query_param = "page_size"


def _import_response(run: Any, request: Request) -> Response:
    body = BulkImportSerializer(data=request.data)
    if not body.is_valid():
        # The documented 400 shape for a malformed body too (index null: not one item's fault).
        errors = [
            {"index": None, "field": field, "message": str(message)}
            for field, messages in body.errors.items()
            for message in (messages if isinstance(messages, list) else [messages])
        ]
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    try:
        result: ImportResult = run(items=body.validated_data["items"], dry_run=body.validated_data["dry_run"])
    except RecordError as exc:
        error = {"index": exc.line, "field": exc.field, "message": exc.message}
        return Response({"errors": [error]}, status=status.HTTP_400_BAD_REQUEST)
    payload = {
        "read": result.read,
        "created": dict(result.created),
        "skipped": result.skipped,
        "duplicates": result.duplicates,
        "dry_run": result.dry_run,
        "summary": result.summary(),
    }
    return Response(payload, status=status.HTTP_200_OK if result.dry_run else status.HTTP_201_CREATED)


_IMPORT_SCHEMA: dict[str, Any] = {
    "request": BulkImportSerializer,
    "responses": {
        201: ImportResultSerializer,
        200: OpenApiResponse(ImportResultSerializer, description="dry run: nothing written"),
        400: OpenApiResponse(ImportErrorSerializer, description="the first invalid item; nothing was written"),
    },
}


class ProblemViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsStaff]
    serializer_class = ProblemSerializer
    pagination_class = IdCursorPagination
    queryset = Problem.objects.all()

    @extend_schema(**_IMPORT_SCHEMA)
    @action(detail=False, methods=["post"], url_path="import")
    def bulk_import(self, request: Request) -> Response:
        """Import MATH-style problems (same fields and checks as `manage.py import_problems`); all or nothing."""
        return _import_response(problems_import_items, request)


class SolutionViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsStaff]
    serializer_class = SolutionSerializer
    pagination_class = IdCursorPagination

    def get_queryset(self) -> QuerySet[Solution]:
        return Solution.objects.select_related("problem")

    @extend_schema(**_IMPORT_SCHEMA)
    @action(detail=False, methods=["post"], url_path="import")
    def bulk_import(self, request: Request) -> Response:
        """Import a solution pool (same fields and checks as `manage.py import_solutions`); all or nothing."""
        return _import_response(solutions_import_items, request)


class GenerationViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [IsStaff]
    serializer_class = GenerationSerializer
    pagination_class = IdCursorPagination
    queryset = Generation.objects.all()


class ExportJobViewSet(viewsets.GenericViewSet):
    permission_classes = [IsStaff]
    serializer_class = ExportJobSerializer
    pagination_class = IdCursorPagination
    queryset = ExportJob.objects.all()

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(
        request=ExportRequestSerializer,
        responses={202: ExportJobSerializer, 400: DetailSerializer},
    )
    def create(self, request: Request) -> Response:
        """Start an export; a worker writes the file. Poll the job, then download it."""
        body = ExportRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        export_format = ExportFormat(body.validated_data["format"])
        if export_format == ExportFormat.PARQUET and not parquet_available():
            return Response(
                {"detail": "Parquet needs pyarrow, which is not installed here; ask for 'stepwise' (JSONL)."},
                status=status.HTTP_400_BAD_REQUEST,
            )
        filters = export_filters_from_dict(dict(body.validated_data.get("filters") or {}))
        job = export_job_create(
            export_format=export_format,
            filters=filters,
            neutral=Neutral(body.validated_data["neutral"]),
            requested_by=request.user if isinstance(request.user, User) else None,
        )
        return Response(self.get_serializer(job).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        responses={(200, "application/octet-stream"): OpenApiResponse(description="the export file"), 404: None}
    )
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str) -> FileResponse:
        path = export_job_file(self.get_object())
        if path is None:
            raise Http404("This export is not finished, or its file is gone.")
        return FileResponse(path.open("rb"), as_attachment=True, filename=path.name)


# --- The labeler's task flow -----------------------------------------------


def _labeler(request: Request) -> Labeler:
    return labeler_for_user(user=request.user)


def _own_assignment(request: Request, pk: int) -> Assignment:
    # Scoped to the caller: another labeler's id is simply not found.
    try:
        return assignment_for_labeler(user=request.user, pk=pk)
    except AssignmentNotFound as exc:
        raise Http404("No such assignment.") from exc


def _assignment_response(assignment: Assignment, *, status_code: int = 200, **extra: Any) -> Response:
    return Response({**extra, **assignment_payload(task_screen(assignment=assignment))}, status=status_code)


def _conflict(exc: Exception) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)


class NextTaskView(APIView):
    permission_classes = [IsLabeler]

    @extend_schema(
        request=None,
        responses={
            200: AssignmentSerializer,
            204: OpenApiResponse(description="no task is waiting for this labeler"),
            403: DetailSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        """Your current assignment, or a newly leased task."""
        labeler = _labeler(request)
        try:
            assignment = assignment_next(labeler=labeler)
        except LabelerMayNotWork:
            detail = f"Your account is {labeler.get_status_display()}: no tasks are handed out to it."
            return Response({"detail": detail}, status=status.HTTP_403_FORBIDDEN)
        if assignment is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return _assignment_response(assignment)


class AssignmentView(APIView):
    permission_classes = [IsLabeler]

    @extend_schema(responses={200: AssignmentSerializer, 404: DetailSerializer})
    def get(self, request: Request, pk: int) -> Response:
        return _assignment_response(_own_assignment(request, pk))


class RatingView(APIView):
    permission_classes = [IsLabeler]

    @extend_schema(
        request=RatingRequestSerializer,
        responses={200: RatingResultSerializer, 400: DetailSerializer, 404: DetailSerializer, 409: DetailSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        """Set one completion's rating and flag; `version` must grow with every click (older requests are ignored)."""
        assignment = _own_assignment(request, pk)
        body = RatingRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            outcome = step_rate(
                assignment_id=assignment.pk,
                user_id=request.user.pk,
                step_index=data["step"],
                completion_index=data["completion"],
                rating=data["rating"],
                flagged=data["flagged"],
                version=data["version"],
            )
        except (AssignmentClosed, RatingRejected) as exc:
            return _conflict(exc)
        assignment.refresh_from_db()
        return Response(
            {"applied": outcome.applied, "assignment": assignment_payload(task_screen(assignment=assignment))}
        )


class SubmitView(APIView):
    permission_classes = [IsLabeler]

    @extend_schema(request=None, responses={200: AssignmentSerializer, 404: DetailSerializer, 409: DetailSerializer})
    def post(self, request: Request, pk: int) -> Response:
        """Finish: the reason (found_error or solution) follows from the ratings."""
        assignment = _own_assignment(request, pk)
        try:
            assignment_submit(assignment_id=assignment.pk, user_id=request.user.pk)
        except (AssignmentClosed, NotFinished) as exc:
            return _conflict(exc)
        assignment.refresh_from_db()
        return _assignment_response(assignment)


class _AbandonView(APIView):
    permission_classes = [IsLabeler]
    finish_reason: FinishReason

    @extend_schema(
        request=ReasonSerializer,
        responses={200: AssignmentSerializer, 400: DetailSerializer, 404: DetailSerializer, 409: DetailSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        assignment = _own_assignment(request, pk)
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            assignment_abandon(
                assignment=assignment, finish_reason=self.finish_reason, reason_text=body.validated_data["reason"]
            )
        except (AssignmentClosed, RatingRejected) as exc:
            return _conflict(exc)
        assignment.refresh_from_db()
        return _assignment_response(assignment)


class GiveUpView(_AbandonView):
    """Stop without finishing; say briefly why."""

    finish_reason = FinishReason.GIVE_UP


class BadProblemView(_AbandonView):
    """Report the problem itself as broken; say briefly why."""

    finish_reason = FinishReason.BAD_PROBLEM
