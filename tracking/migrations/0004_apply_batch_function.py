"""PostgreSQL: ``tracking_apply_batch``, a recording thread's batch as one statement (``tracking.single_trip``).

A PL/pgSQL function, so its plan is cached per connection (planning the statement cost more than
running it) without client-side prepared statements, which poolers in transaction mode refuse.
Given each job's composed outcome (JSON), it locks the jobs' events in id order, applies the
outcome to those in one of ``open_statuses``, moves the counter shard by the states they really
left, stamps the task's ``started_at`` once, and returns every locked event's state before the
batch. Nothing on other databases.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION tracking_apply_batch(
    outcomes json, job_ids json, open_statuses text[], batch_at timestamptz, batch_shard integer, keep_newest integer
) RETURNS TABLE (event_job_id text, event_task_id text, event_status text, event_final boolean)
LANGUAGE plpgsql AS $function$
BEGIN
    RETURN QUERY
    WITH v AS (
        SELECT * FROM json_to_recordset(outcomes) AS r (
            job_id text, status text, final boolean, attempts integer, changes integer, updated_at timestamptz, messages jsonb
        )
    ), locked AS (
        SELECT e.id, e.job_id, e.task_id, e.status, e.is_final FROM tracking_event e
        WHERE e.job_id = ANY(ARRAY(SELECT json_array_elements_text(job_ids))) ORDER BY e.id FOR UPDATE
    ), applied AS (
        SELECT l.id, l.task_id, l.status AS was, v.status, v.final, v.attempts, v.changes, v.updated_at, v.messages
        FROM locked l JOIN v ON v.job_id = l.job_id
        WHERE NOT l.is_final AND l.status = ANY(open_statuses)
    ), events AS (
        UPDATE tracking_event e SET
            status = a.status,
            is_final = a.final,
            attempts = e.attempts + a.attempts,
            revision = e.revision + a.changes,
            updated_at = a.updated_at,
            messages = CASE WHEN a.messages IS NULL THEN e.messages ELSE (
                -- appended, then cut to the first and the newest keep_newest (transitions.capped)
                SELECT jsonb_agg(m.entry ORDER BY m.position)
                FROM jsonb_array_elements(COALESCE(e.messages, '[]'::jsonb) || a.messages) WITH ORDINALITY AS m (entry, position)
                WHERE m.position = 1
                   OR m.position > jsonb_array_length(COALESCE(e.messages, '[]'::jsonb) || a.messages) - keep_newest
            ) END
        FROM applied a WHERE e.id = a.id
    ), counted AS (
        INSERT INTO tracking_taskcounter AS c (task_id, shard, enqueue, working, finish, failed, error, settled, changes, updated_at)
        SELECT a.task_id, batch_shard,
            SUM((a.status = 'enqueue')::integer - (a.was = 'enqueue')::integer),
            SUM((a.status = 'working')::integer - (a.was = 'working')::integer),
            SUM((a.status = 'finish')::integer - (a.was = 'finish')::integer),
            SUM((a.status = 'failed')::integer - (a.was = 'failed')::integer),
            SUM((a.status = 'error')::integer - (a.was = 'error')::integer),
            SUM(a.final::integer),
            SUM(a.changes),
            batch_at
        FROM applied a GROUP BY a.task_id
        ON CONFLICT (task_id, shard) DO UPDATE SET
            enqueue = c.enqueue + excluded.enqueue,
            working = c.working + excluded.working,
            finish = c.finish + excluded.finish,
            failed = c.failed + excluded.failed,
            error = c.error + excluded.error,
            settled = c.settled + excluded.settled,
            changes = c.changes + excluded.changes,
            updated_at = excluded.updated_at
        RETURNING c.task_id
    ), started AS (
        -- after the counter row (it reads what the upsert returns): the task row is locked last
        UPDATE tracking_task t SET started_at = batch_at
        WHERE t.id IN (SELECT counted.task_id FROM counted)
          AND t.id IN (SELECT a.task_id FROM applied a WHERE a.attempts > 0)
          AND t.started_at IS NULL
    )
    SELECT l.job_id::text, l.task_id::text, l.status::text, l.is_final FROM locked l;
END
$function$
"""

DROP = "DROP FUNCTION IF EXISTS tracking_apply_batch(json, json, text[], timestamptz, integer, integer)"


def create(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("tracking", "0003_task_callbacks")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
