module github.com/pipeshard/pipeshard

go 1.26
