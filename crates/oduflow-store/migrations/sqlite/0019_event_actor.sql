-- Who asked for each change: the API token's name (`api-token:NAME`), the
-- operator at the command line (`cli:USER`, or the `actor` setting of a
-- service), or a pass of oduflow's own (`verification`). Empty for what
-- the worker records of its own runs. Older events keep none.
ALTER TABLE events ADD COLUMN actor TEXT;
