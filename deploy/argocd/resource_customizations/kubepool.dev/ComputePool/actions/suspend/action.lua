-- Suspend the pool: spec.suspend (Snowflake's ALTER COMPUTE POOL ... SUSPEND).
obj.spec.suspend = true
return obj
