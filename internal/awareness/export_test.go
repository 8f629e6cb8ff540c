package awareness

// ParsePlainPayload is the fast path of ParsePayload, for the tests of package
// awareness_test.
var ParsePlainPayload = parsePlainPayload
