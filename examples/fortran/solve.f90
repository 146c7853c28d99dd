! Solves A x = b through the grid from Fortran: dgesv placed by the metaserver through a
! GridRPC handle, then the product checked with mmul through Ninf_call. Usage: solve [N]
! against the grid `ninf up` runs (its grid file is the default; NINF_GRID names another).
program solve
    use ninf
    use, intrinsic :: iso_c_binding
    implicit none
    type(grpc_function_handle) :: h
    integer(c_int) :: n, i, j
    integer(c_int), allocatable :: ipvt(:)
    real(c_double), allocatable :: a(:, :), lu(:, :), x(:), b(:), ax(:, :), xm(:, :)
    character(len=32) :: arg
    real(c_double) :: error

    n = 200
    if (command_argument_count() >= 1) then
        call get_command_argument(1, arg)
        read (arg, *) n
    end if
    allocate(a(n, n), lu(n, n), x(n), b(n), ipvt(n), ax(n, n), xm(n, n))
    do j = 1, n
        do i = 1, n
            a(i, j) = 1.0d0 / real(i + j - 1, c_double)
        end do
        a(j, j) = a(j, j) + real(n, c_double)
        x(j) = real(mod(j * 7, 11), c_double) - 5.0d0
    end do
    b = matmul(a, x)

    call check(grpc_initialize(), "grpc_initialize")
    call check(grpc_function_handle_default(h, "dgesv"), "grpc_function_handle_default")
    lu = a
    call check(grpc_call(h, lu, n, ipvt, b), "dgesv")
    error = maxval(abs(b - x)) / maxval(abs(x))
    print '(a, i0, a, es9.2)', "n = ", n, ": largest relative error of x ", error
    if (error > 1.0d-8) stop 1

    ! The same solution through Ninf_call: A times a matrix whose columns are all x.
    do j = 1, n
        xm(:, j) = b
    end do
    if (Ninf_call("mmul", n, a, xm, ax) /= NINF_OK) then
        print *, "mmul: ", ninf_error_message()
        stop 1
    end if
    error = maxval(abs(ax(:, 1) - matmul(a, x))) / maxval(abs(matmul(a, x)))
    print '(a, es9.2)', "A x through Ninf_call(mmul) matches the local product: ", error
    if (error > 1.0d-8) stop 1
    call check(grpc_function_handle_destruct(h), "grpc_function_handle_destruct")
    call check(grpc_finalize(), "grpc_finalize")

contains

    subroutine check(code, what)
        integer(c_int), intent(in) :: code
        character(len=*), intent(in) :: what
        if (code /= GRPC_NO_ERROR) then
            print *, what, ": ", grpc_error_string(code), ": ", ninf_error_message()
            stop 1
        end if
    end subroutine
end program solve
