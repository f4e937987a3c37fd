-- Cancel the job for good: spec.cancel, as `kubepool cancel` and the SDK's MLJob.cancel() do.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.cancel = true
return obj
