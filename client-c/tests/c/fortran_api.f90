! The Fortran module's checks, against a grid with the selftest module. Argument: GRID_FILE
! MISSING. Prints "ok ..." per check and "all passed"; stops with 1 at the first failure.
program fortran_api
    use ninf
    use, intrinsic :: iso_c_binding
    implicit none
    type(grpc_function_handle) :: h, noop, fail
    character(len=512) :: grid, missing
    integer(c_int), target :: n, code
    real(c_double) :: x(5), y(5), r(1)

    call get_command_argument(1, grid)
    call get_command_argument(2, missing)
    call expect(grpc_function_handle_default(h, "ddot"), GRPC_NOT_INITIALIZED, "before init")
    call expect(grpc_initialize(trim(missing)), GRPC_CONFIGFILE_NOT_FOUND, "missing grid file")
    call expect(grpc_initialize(trim(grid)), GRPC_NO_ERROR, "grpc_initialize")
    print '(a)', "ok the grid file is read; a missing one is GRPC_CONFIGFILE_NOT_FOUND"

    call expect(grpc_function_handle_default(h, "no_such_routine"), GRPC_FUNCTION_NOT_FOUND, &
        "unknown routine")
    call contains(ninf_error_message(), "no_such_routine")
    if (Ninf_call("no_such_routine", n, x, r) /= NINF_ERROR) stop 1
    print '(a)', "ok an unknown routine is GRPC_FUNCTION_NOT_FOUND, and NINF_ERROR by name"

    n = 5
    x = [1, 2, 3, 4, 5]
    y = [2, 0, 1, 0, -1]
    call expect(grpc_function_handle_default(h, "ddot"), GRPC_NO_ERROR, "ddot handle")
    call expect(grpc_call(h, n, x, y, r), GRPC_NO_ERROR, "ddot")
    if (r(1) /= dot_product(x, y)) stop 1
    if (Ninf_call("dnrm2", n, x, r) /= NINF_OK) stop 1
    if (abs(r(1) - norm2(x)) > 1.0d-12) stop 1
    print '(a)', "ok ddot through grpc_call and dnrm2 through Ninf_call equal the local values"

    call expect(grpc_function_handle_default(noop, "noop"), GRPC_NO_ERROR, "noop handle")
    call expect(grpc_call_args(noop, [c_loc(n)]), GRPC_NO_ERROR, "noop")
    call expect(grpc_function_handle_default(fail, "fail"), GRPC_NO_ERROR, "fail handle")
    code = 7
    call expect(grpc_call_args(fail, [c_loc(code)]), GRPC_SESSION_FAILED, "fail")
    call contains(ninf_error_message(), "selftest failure with code 7")
    call contains(grpc_error_string(GRPC_SESSION_FAILED), "GRPC_SESSION_FAILED")
    print '(a)', "ok grpc_call_args calls any routine; a failing one is GRPC_SESSION_FAILED, saying why"

    call expect(grpc_function_handle_destruct(h), GRPC_NO_ERROR, "destruct")
    call expect(grpc_function_handle_destruct(h), GRPC_INVALID_FUNCTION_HANDLE, "destruct twice")
    call expect(grpc_function_handle_destruct(noop), GRPC_NO_ERROR, "destruct noop")
    call expect(grpc_function_handle_destruct(fail), GRPC_NO_ERROR, "destruct fail")
    call expect(grpc_finalize(), GRPC_NO_ERROR, "grpc_finalize")
    print '(a)', "all passed"

contains

    subroutine expect(got, wanted, what)
        integer(c_int), intent(in) :: got, wanted
        character(len=*), intent(in) :: what
        if (got /= wanted) then
            print '(*(a))', "FAILED ", what, ": ", grpc_error_string(got), " (", &
                ninf_error_message(), ")"
            stop 1
        end if
    end subroutine

    subroutine contains(text, part)
        character(len=*), intent(in) :: text, part
        if (index(text, part) == 0) then
            print '(*(a))', "FAILED: '", text, "' does not say ", part
            stop 1
        end if
    end subroutine
end program fortran_api
