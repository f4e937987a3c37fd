-- Resume the pool: clear spec.suspend (Snowflake's ALTER COMPUTE POOL ... RESUME).
obj.spec.suspend = false
return obj
