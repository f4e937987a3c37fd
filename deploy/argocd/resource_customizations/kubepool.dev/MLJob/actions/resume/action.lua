-- Resume a suspended job: clear spec.suspend; it joins the end of its pools' queue and runs from scratch.
obj.spec.suspend = false
return obj
