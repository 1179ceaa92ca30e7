-- The console's counts at scale, kept off the start path. Every change that can move an
-- operation in the overview's counts (its row, its task, its envelope, a question, a
-- reconciliation item, a handoff) appends the operation's id to overview_dirty from a trigger:
-- an insert into a table with no index and no unique key, so concurrent starts never wait for
-- each other and no counter row is touched in their transactions. A compactor (one at a time
-- across replicas, under an advisory lock; operations.Store.CompactOverview) takes the dirty ids,
-- computes each operation's facts from the ledger in one snapshot, keeps them in overview_ops and
-- adds the difference from the facts it kept before to the counter tables. Readers add to the
-- counters the difference for the ids still dirty, in the same snapshot, so a read is exact
-- whether or not the compactor has run. Recomputing from the ledger, instead of a trigger
-- adding +1/-1 from the row it sees, is what keeps counts that join two rows (a task's state
-- with its operation's outcome, "needs a person" over four tables) exact when two transactions
-- change the two rows at once.
CREATE TABLE overview_dirty (
    operation_id uuid NOT NULL
);

-- counted_at is set by a full recount (operations.Store.RecountOverview); until then readers use
-- the direct aggregation over the ledger and the compactor's service recounts first. A ledger
-- that is empty now is counted as it is.
CREATE TABLE overview_state (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    counted_at timestamptz
);
INSERT INTO overview_state (counted_at) SELECT CASE WHEN EXISTS (SELECT 1 FROM operations) THEN NULL ELSE now() END;

-- Each operation's facts as last counted (no foreign key: the row outlives a deleted operation
-- until the compactor takes it out of the counts). Hours are UTC hours. ended_hour is the hour
-- its work ended (its task's final state, or without a task its envelope's finish); ri_hours
-- the hours its reconciliation items were opened, one per item (NULL for none); to_terminal the seconds from
-- its start to its task's final state.
CREATE TABLE overview_ops (
    operation_id uuid        PRIMARY KEY,
    tenant       text        NOT NULL,
    workflow     text        NOT NULL,
    route        text        NOT NULL,
    created_at   timestamptz NOT NULL,
    task_state   text        NOT NULL,
    tool_error   boolean     NOT NULL,
    outcome      text        NOT NULL,
    attention    boolean     NOT NULL,
    needs_person boolean     NOT NULL,
    ended_hour   timestamptz,
    ri_open      boolean     NOT NULL,
    ri_hours     timestamptz[],
    server       text        NOT NULL,
    polls        integer     NOT NULL,
    to_terminal  numeric
);

-- Every operation by workflow, route, task state ('' without a task), tool error, domain
-- outcome, attention set and needs a person; ri_open counts those with an open item.
CREATE TABLE overview_totals (
    tenant       text    NOT NULL,
    workflow     text    NOT NULL,
    route        text    NOT NULL,
    task_state   text    NOT NULL,
    tool_error   boolean NOT NULL,
    outcome      text    NOT NULL,
    attention    boolean NOT NULL,
    needs_person boolean NOT NULL,
    ops          bigint  NOT NULL,
    ri_open      bigint  NOT NULL,
    PRIMARY KEY (tenant, workflow, route, task_state, tool_error, outcome, attention, needs_person)
);

-- Operations that are not open (no task in creating, working or input_required, no attention)
-- by the hour they started: the matrix's window.
CREATE TABLE overview_created (
    tenant     text        NOT NULL,
    hour       timestamptz NOT NULL,
    workflow   text        NOT NULL,
    route      text        NOT NULL,
    task_state text        NOT NULL,
    tool_error boolean     NOT NULL,
    outcome    text        NOT NULL,
    ops        bigint      NOT NULL,
    PRIMARY KEY (tenant, hour, workflow, route, task_state, tool_error, outcome)
);

-- The hourly chart: operations started, work ended, reconciliation items opened.
CREATE TABLE overview_hourly (
    tenant  text        NOT NULL,
    hour    timestamptz NOT NULL,
    starts  bigint      NOT NULL,
    ended   bigint      NOT NULL,
    unknown bigint      NOT NULL,
    PRIMARY KEY (tenant, hour)
);

-- The servers page: tasks that reached a final state per server and hour, their status reads,
-- the failed ones and the seconds from start to final state.
CREATE TABLE overview_server_hours (
    tenant      text        NOT NULL,
    server      text        NOT NULL,
    hour        timestamptz NOT NULL,
    ended       bigint      NOT NULL,
    polls       bigint      NOT NULL,
    errors      bigint      NOT NULL,
    to_terminal numeric     NOT NULL,
    PRIMARY KEY (tenant, server, hour)
);

-- The operations list's filters on what the ledger spreads over several tables (task state,
-- needs a person, mismatch) or that select few rows (workflow, route, outcome), newest first.
-- The list takes its page from here for the ids that are not dirty and from the ledger for
-- those that are (operations.Store.List).
CREATE INDEX overview_ops_needs_person_idx ON overview_ops (created_at DESC, operation_id DESC) WHERE needs_person;
CREATE INDEX overview_ops_mismatch_idx ON overview_ops (created_at DESC, operation_id DESC)
    WHERE ((task_state IN ('failed', 'cancelled') OR (task_state = 'completed' AND tool_error)) AND outcome = 'applied' OR (task_state = 'completed' AND NOT tool_error AND outcome = 'not_applied'));
CREATE INDEX overview_ops_task_state_idx ON overview_ops (task_state, created_at DESC, operation_id DESC);
CREATE INDEX overview_ops_outcome_idx ON overview_ops (outcome, created_at DESC, operation_id DESC);
CREATE INDEX overview_ops_workflow_idx ON overview_ops (workflow, created_at DESC, operation_id DESC);
CREATE INDEX overview_ops_route_idx ON overview_ops (route, created_at DESC, operation_id DESC);
-- The overview's matrix reads the operations of its window's first, partial hour by start.
CREATE INDEX overview_ops_created_idx ON overview_ops (created_at);

-- The operations list's search: a business key containing the words (trigram index), or an
-- operation id, task id or idempotency key equal to them. Kept from the ledger by the compactor
-- like overview_ops (a row changes when its task gets its id, not with every status), so the
-- start path maintains no text index; List searches here for the operations not dirty.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE overview_search (
    operation_id    uuid        PRIMARY KEY,
    tenant          text        NOT NULL,
    created_at      timestamptz NOT NULL,
    object_ref      text        NOT NULL,
    idempotency_key text        NOT NULL,
    task_id         text
);
-- Without the pending list (fastupdate): the compactor pays for each insert into the index
-- itself, and a search never scans entries waiting to be merged.
CREATE INDEX overview_search_object_ref_idx ON overview_search USING gin (object_ref gin_trgm_ops) WITH (fastupdate = off);
CREATE INDEX overview_search_key_idx ON overview_search (idempotency_key);
CREATE INDEX overview_search_task_idx ON overview_search (task_id) WHERE task_id IS NOT NULL;

-- The dirty marks. The operations row and the questions and reconciliation items already have a
-- trigger per changed row (the live updates of 00007/00017); their function appends the mark in
-- the same call, so a start's ledger insert runs no second trigger. The task, its envelope and
-- handoffs get a trigger of their own, on the columns the counts read only (a poll that changes
-- nothing counted runs none).
CREATE OR REPLACE FUNCTION taskgate_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'operations' THEN
        INSERT INTO live_changes (area, tenant) VALUES (TG_ARGV[0], NEW.tenant);
        INSERT INTO overview_dirty (operation_id) VALUES (NEW.id);
    ELSE
        INSERT INTO live_changes (area, operation_id) VALUES (TG_ARGV[0], NEW.operation_id);
        IF TG_TABLE_NAME <> 'task_timeline' THEN
            INSERT INTO overview_dirty (operation_id) VALUES (NEW.operation_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION taskgate_overview_dirty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'operations' THEN
        IF TG_OP = 'DELETE' THEN
            INSERT INTO overview_dirty (operation_id) VALUES (OLD.id);
        ELSE
            INSERT INTO overview_dirty (operation_id) VALUES (NEW.id);
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO overview_dirty (operation_id) VALUES (OLD.operation_id);
    ELSE
        INSERT INTO overview_dirty (operation_id) VALUES (NEW.operation_id);
        IF TG_OP = 'UPDATE' AND OLD.operation_id <> NEW.operation_id THEN
            INSERT INTO overview_dirty (operation_id) VALUES (OLD.operation_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER operations_overview_update AFTER UPDATE OF tenant, workflow, route, created_at, object_ref, idempotency_key ON operations
    FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.workflow IS DISTINCT FROM NEW.workflow
        OR OLD.route IS DISTINCT FROM NEW.route OR OLD.created_at IS DISTINCT FROM NEW.created_at
        OR OLD.object_ref IS DISTINCT FROM NEW.object_ref OR OLD.idempotency_key IS DISTINCT FROM NEW.idempotency_key)
    EXECUTE FUNCTION taskgate_overview_dirty();
CREATE TRIGGER operations_overview_delete AFTER DELETE ON operations
    FOR EACH ROW EXECUTE FUNCTION taskgate_overview_dirty();

CREATE TRIGGER tasks_overview AFTER INSERT OR DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION taskgate_overview_dirty();
CREATE TRIGGER tasks_overview_update AFTER UPDATE OF operation_id, state, tool_error, terminal_at, server, polls, task_id ON tasks
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.tool_error IS DISTINCT FROM NEW.tool_error
        OR OLD.terminal_at IS DISTINCT FROM NEW.terminal_at OR OLD.server IS DISTINCT FROM NEW.server OR OLD.task_id IS DISTINCT FROM NEW.task_id
        OR OLD.operation_id IS DISTINCT FROM NEW.operation_id
        OR (NEW.terminal_at IS NOT NULL AND OLD.polls IS DISTINCT FROM NEW.polls))
    EXECUTE FUNCTION taskgate_overview_dirty();

CREATE TRIGGER task_envelopes_overview AFTER INSERT OR DELETE ON task_envelopes
    FOR EACH ROW EXECUTE FUNCTION taskgate_overview_dirty();
CREATE TRIGGER task_envelopes_overview_update AFTER UPDATE OF operation_id, finished_at ON task_envelopes
    FOR EACH ROW WHEN (OLD.finished_at IS DISTINCT FROM NEW.finished_at OR OLD.operation_id IS DISTINCT FROM NEW.operation_id)
    EXECUTE FUNCTION taskgate_overview_dirty();

CREATE TRIGGER handoff_items_overview AFTER INSERT OR DELETE ON handoff_items
    FOR EACH ROW EXECUTE FUNCTION taskgate_overview_dirty();
CREATE TRIGGER handoff_items_overview_update AFTER UPDATE OF operation_id, closed_at ON handoff_items
    FOR EACH ROW WHEN (OLD.closed_at IS DISTINCT FROM NEW.closed_at OR OLD.operation_id IS DISTINCT FROM NEW.operation_id)
    EXECUTE FUNCTION taskgate_overview_dirty();

CREATE TRIGGER pending_inputs_overview_delete AFTER DELETE ON pending_inputs
    FOR EACH ROW EXECUTE FUNCTION taskgate_overview_dirty();
CREATE TRIGGER reconciliation_items_overview_delete AFTER DELETE ON reconciliation_items
    FOR EACH ROW EXECUTE FUNCTION taskgate_overview_dirty();

-- Recomputing one operation's facts reads its reconciliation items by operation.
CREATE INDEX reconciliation_items_operation_idx ON reconciliation_items (operation_id, id);
