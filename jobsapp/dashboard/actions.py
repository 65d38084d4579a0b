"""The dashboard's mutations: POST-only views behind CSRF, each one call into ``jobsapp.api``.

Forms name jobs the way Sidekiq's Web UI does: a sorted-set entry by ``<score>-<jid>`` keys, a
queued job by jid. Each view acts, records a message for the next page, and redirects back
(POST/redirect/GET) to ``next`` when it is a dashboard URL on this host, else to a default page:
a form cannot turn the dashboard into an open redirect. Unknown actions answer 400.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from .. import api
from ..templatetags.jobs_dashboard import queue_url
from .access import staff_view
from .pages import SET_PAGES

SET_ACTIONS = {
    "retry": "retried",
    "add_to_queue": "added to their queue",
    "kill": "killed",
    "delete": "deleted",
}
MAX_SELECTED = 1000


def _back(request: HttpRequest, default: str) -> HttpResponseRedirect:
    target = request.POST.get("next", "")
    root = reverse("jobsapp:overview")
    if target.startswith(root) and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return HttpResponseRedirect(target)
    return HttpResponseRedirect(default)


def _tell(request: HttpRequest, text: str, *, level: int = messages.SUCCESS) -> None:
    messages.add_message(request, level, text, fail_silently=True)


@staff_view
@require_POST
def queue_action(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("queue", "")
    action = request.POST.get("action", "")
    if not name:
        return HttpResponseBadRequest("queue is required")
    queue = api.Queue(name)
    if action == "pause":
        queue.pause()
        _tell(request, f"Paused queue {name}: workers will not take jobs from it.")
    elif action == "resume":
        queue.resume()
        _tell(request, f"Resumed queue {name}.")
    elif action == "clear":
        count = queue.clear()
        _tell(request, f"Cleared queue {name}: {count} jobs deleted.")
    elif action == "delete":
        jids = request.POST.getlist("jid")[:MAX_SELECTED]
        deleted = sum(1 for jid in jids if queue.delete_job(jid))
        _tell(
            request,
            f"Deleted {deleted} of {len(jids)} jobs from {name}.",
            level=messages.SUCCESS if deleted else messages.WARNING,
        )
    else:
        return HttpResponseBadRequest("unknown action")
    return _back(request, queue_url(name) or reverse("jobsapp:queues"))


@staff_view
@require_POST
def process_action(request: HttpRequest) -> HttpResponse:
    identity = request.POST.get("identity", "")
    action = request.POST.get("action", "")
    if action not in ("quiet", "stop"):
        return HttpResponseBadRequest("unknown action")
    sent = api.ProcessSet.quiet(identity) if action == "quiet" else api.ProcessSet.stop(identity)
    if sent:
        _tell(request, f"Sent {'quiet (TSTP)' if action == 'quiet' else 'stop (TERM)'} to {identity}.")
    else:
        _tell(request, f"No live process {identity}; nothing sent.", level=messages.WARNING)
    return _back(request, reverse("jobsapp:busy"))


@staff_view
@require_POST
def cancel_action(request: HttpRequest) -> HttpResponse:
    """Cancel a job by jid (the Busy page's Cancel button): a running job stops within a second,
    a waiting one is removed (``api.cancel``)."""
    jid = request.POST.get("jid", "")
    if not jid:
        return HttpResponseBadRequest("jid is required")
    answer = api.cancel(jid)
    found = answer.outcome in (api.CancelOutcome.CANCELLED, api.CancelOutcome.CANCELLING)
    _tell(request, answer.message[:300], level=messages.SUCCESS if found else messages.WARNING)
    return _back(request, reverse("jobsapp:busy"))


@staff_view
@require_POST
def set_action(request: HttpRequest, slug: str) -> HttpResponse:
    if slug not in SET_PAGES:
        return HttpResponseBadRequest("unknown job set")
    job_set: api.JobSet = SET_PAGES[slug]["set"]()
    action = request.POST.get("action", "")
    if action not in SET_ACTIONS or (action == "kill" and not job_set.can_kill):
        return HttpResponseBadRequest("unknown action")
    if request.POST.get("scope") == "all":
        class_name = request.POST.get("class", "").strip() or None
        substring = request.POST.get("q", "").strip() or None
        count = {
            "retry": job_set.retry_all,
            "add_to_queue": job_set.add_all_to_queue,
            "kill": job_set.kill_all,
            "delete": job_set.delete_all,
        }[action](class_name=class_name, substring=substring)
        which = "matching jobs" if class_name or substring else "jobs"
        _tell(request, f"{count} {which} {SET_ACTIONS[action]}.")
    else:
        keys = request.POST.getlist("key")[:MAX_SELECTED]
        if not keys:
            _tell(request, "Select at least one job.", level=messages.WARNING)
            return _back(request, reverse("jobsapp:job_set", args=[slug]))
        entries = job_set.get_many(keys)
        count = job_set.apply(action, entries)
        level = messages.SUCCESS if count == len(keys) else messages.WARNING
        _tell(request, f"{count} of {len(keys)} jobs {SET_ACTIONS[action]}.", level=level)
    return _back(request, reverse("jobsapp:job_set", args=[slug]))


@staff_view
@require_POST
def periodic_action(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("name", "")
    action = request.POST.get("action", "")
    if not name:
        return HttpResponseBadRequest("name is required")
    if action in ("enable", "disable"):
        if api.PeriodicSet.set_enabled(name, action == "enable"):
            _tell(request, f"{action.capitalize()}d periodic job {name}.")
        else:
            _tell(request, f"No periodic job {name}.", level=messages.WARNING)
    elif action == "run":
        try:
            jid = api.PeriodicSet.run_now(name)
        except ValueError as exc:  # a stored message another client broke: nothing was pushed
            _tell(request, str(exc), level=messages.WARNING)
            return _back(request, reverse("jobsapp:periodic"))
        if jid:
            _tell(request, f"Enqueued {name} now as {jid}.")
        else:
            _tell(request, f"No periodic job {name}.", level=messages.WARNING)
    else:
        return HttpResponseBadRequest("unknown action")
    return _back(request, reverse("jobsapp:periodic"))
