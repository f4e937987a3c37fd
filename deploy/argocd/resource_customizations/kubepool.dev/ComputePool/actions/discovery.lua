-- Actions Argo CD offers on a ComputePool: suspend it (no new jobs are admitted; running ones finish) or resume it.
local actions = {}
local suspended = obj.spec ~= nil and obj.spec.suspend == true
actions["suspend"] = {["disabled"] = suspended}
actions["resume"] = {["disabled"] = not suspended}
return actions
