-- Suspend the job: spec.suspend, as `kubepool suspend` and the SDK's MLJob.suspend() do (pods removed, capacity
-- released, the job stays PENDING with reason Suspended).
obj.spec.suspend = true
return obj
