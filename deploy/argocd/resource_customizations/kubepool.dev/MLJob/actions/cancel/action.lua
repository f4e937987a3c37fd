-- Cancel the job: spec.suspend, as `kubepool cancel` and the SDK's MLJob.cancel() do.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.suspend = true
return obj
