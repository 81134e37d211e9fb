// A stand-in for the Tencent Cloud VPC SDK, which the Go module proxy does not
// serve: see ../go.mod. Not a client of anything.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.22
