-- 0007_stopped_results: a stopped call's result says so in a field (issue 29); the same as the
-- SQLite store's 0018_stopped_results. Results stored before carry only the text ("Run stopped
-- by <who>"): mark them once here, so their cards still say "cancelled".
UPDATE entries
SET message = jsonb_set(message::jsonb, '{result,stopped}', 'true'::jsonb)::json
WHERE role = 'toolResult'
  AND message -> 'result' ->> 'isError' = 'true'
  AND message -> 'result' -> 'content' -> 0 ->> 'text' LIKE 'Run stopped by %';
